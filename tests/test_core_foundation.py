"""The shared core pieces: the immutable history value, image helpers, model cache, ComfyUI bridge."""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from conftest import weights
from respec import comfy, models
from respec.errors import CorruptWeightsError, DownloadNotAllowedError, InputError, Interrupted, MissingWeightsError
from respec.history import History, StoredImage
from respec.images import as_array, as_mask, as_rgb, content_hash, downscale_to_budget, resize_mask, rgb_array, to_uint8
from respec.plan import Plan
from respec.records import json_safe


def _img(seed, h=8, w=10, c=3):
    return np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)


def test_append_returns_a_new_history_and_shares_earlier_images():
    h0 = History.start(_img(0))
    h1 = h0.append(_img(1), "add a red ball", "add a red ball on the left")
    assert len(h0) == 1 and len(h1) == 2
    assert h1.turns[0] is h0.turns[0], "earlier turns are shared, not copied"
    assert h1.images[0].array is h0.images[0].array
    assert h1.next_turn == 2 and h1.instructions == ["add a red ball"]
    assert h1.current.sent_instruction == "add a red ball on the left"


def test_stored_images_are_read_only_and_hashed_by_content():
    a = StoredImage(_img(3))
    with pytest.raises(ValueError):
        a.array[0, 0, 0] = 1
    assert StoredImage(_img(3)) == a and StoredImage(_img(4)) != a
    assert a.digest == content_hash(_img(3))


def test_rewind_keeps_turns_up_to_k_and_refuses_missing_turns():
    h = History.start(_img(0)).append(_img(1), "a").append(_img(2), "b")
    assert [t.instruction for t in h.rewind(1).turns] == ["", "a"]
    with pytest.raises(InputError, match="turns 0..2"):
        h.rewind(5)


def test_image_lookup_names_the_valid_ids():
    h = History.start(_img(0))
    with pytest.raises(InputError, match="ids 0..0"):
        h.image(3)


def test_fingerprint_changes_with_any_turn():
    h = History.start(_img(0)).append(_img(1), "a")
    assert h.fingerprint != h.rewind(0).fingerprint
    assert h.fingerprint == History.start(_img(0)).append(_img(1), "a").fingerprint


def test_plan_round_trips_and_refuses_unknown_fields():
    p = Plan(turn=2, user_instruction="remove it", synthesis_instruction="remove it, revealing X",
             is_restoration=True, restoration_source_id=0, identity_anchor_id=1, image_ids=(0, 1),
             fallbacks=("missing_region",))
    assert Plan.from_dict(p.to_dict()) == p
    with pytest.raises(ValueError, match="unknown plan fields"):
        Plan.from_dict({**p.to_dict(), "bogus": 1})


# A stored plan as a provenance planner wrote it before the typed fields (the keys sit in "meta").
_STORED_PLAN = {
    "turn": 3, "user_instruction": "Remove the hat", "synthesis_instruction": "Remove the hat, revealing X",
    "is_restoration": True, "preservation_target": None, "restoration_source_id": 1, "identity_anchor_id": 2,
    "restoration_region": "the pixels turn 2 changed (4.0% of the image)", "image_ids": [1, 2], "reasoning": None,
    "raw_text": "", "fallbacks": [], "vlm_called": False, "controller": "provenance", "seconds": 0.0,
    "meta": {"selector": "provenance", "provenance_confidence": 0.91, "vlm_calls_so_far": 0, "edit_scope": "global",
             "provenance": {"turn": 2, "candidates": [2], "evidence": "request+provenance", "ambiguous": False,
                            "reason": "the request names 'hat', which turn 2 added", "changed": {"2": 0.04},
                            "objects": [{"turn": 2, "label": "hat"}], "source_id": 1},
             "vlm_calls": 0},
}


def test_the_typed_plan_fields_read_and_write_the_stored_keys_of_meta():
    """provenance, edit_scope and vlm_calls are Plan fields in memory and the same "meta" keys on the
    wire: an old stored plan reads into them, and writes back as the same JSON."""
    plan = Plan.from_dict(json.loads(json.dumps(_STORED_PLAN)))
    assert plan.provenance.turn == 2 and plan.provenance.source_id == 1 and plan.provenance.changed == ((2, 0.04),)
    assert plan.edit_scope == "global" and plan.vlm_calls == 0
    assert not {"provenance", "edit_scope", "vlm_calls"} & set(plan.meta)
    assert json.dumps(plan.to_dict(), sort_keys=True) == json.dumps(_STORED_PLAN, sort_keys=True)
    assert Plan.from_dict(plan.to_dict()) == plan
    bare = Plan(turn=1, user_instruction="a", synthesis_instruction="a")
    assert bare.to_dict()["meta"] == {} and Plan.from_dict(bare.to_dict()) == bare   # unset fields stay unwritten


def test_a_typed_plan_field_is_never_also_a_meta_key():
    with pytest.raises(ValueError, match="vlm_calls"):
        Plan(turn=1, user_instruction="a", synthesis_instruction="a", meta={"vlm_calls": 1})


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "P", "I;16"])
def test_images_of_any_mode_become_uint8_arrays(mode):
    pil = Image.new(mode, (5, 4))
    arr = as_array(pil)
    assert arr.dtype == np.uint8 and arr.shape[:2] == (4, 5) and arr.shape[2] in (1, 3, 4)
    assert as_rgb(arr).mode == "RGB"


def test_float_images_round_trip_exactly_through_uint8():
    k = np.arange(256, dtype=np.uint8).reshape(16, 16, 1)
    assert np.array_equal(to_uint8(k.astype(np.float32) / 255.0), k)


def test_wrong_image_shapes_are_refused_with_the_shape():
    with pytest.raises(InputError, match=r"\(4, 4, 2\)"):
        as_array(np.zeros((4, 4, 2), np.uint8))
    with pytest.raises(InputError, match="uint8"):
        as_array(np.zeros((4, 4, 3), np.float32))


def test_downscale_keeps_the_pixel_budget_and_aspect():
    out = downscale_to_budget(_img(0, 400, 200), 10_000)
    assert out.size[0] * out.size[1] <= 10_000 and abs(out.size[1] / out.size[0] - 2) < 0.05
    assert downscale_to_budget(_img(0, 10, 10), 10_000).size == (10, 10)


def test_model_cache_loads_once_per_key():
    cache = models.ModelCache()
    calls = []
    a = cache.get(("kind", 1), lambda: calls.append(1) or object())
    b = cache.get(("kind", 1), lambda: calls.append(1) or object())
    c = cache.get(("kind", 2), lambda: calls.append(1) or object())
    assert a is b and a is not c and len(calls) == 2 and cache.loads == 2
    assert cache.drop_kind("kind") == 2 and len(cache) == 0


def test_missing_weights_name_the_file_and_every_folder_searched(tmp_path):
    with pytest.raises(MissingWeightsError) as e:
        models.resolve_path("sams", "sam_vit_h_4b8939.pth", "download it from the SAM release page", want="file")
    msg = str(e.value)
    assert "sam_vit_h_4b8939.pth" in msg and str(comfy.model_search_dirs("sams")[-1]) in msg and "SAM release" in msg


def test_weights_are_found_in_the_standalone_models_dir():
    d = comfy.model_search_dirs("sams")[-1]
    d.mkdir(parents=True)
    (d / "tiny.pth").write_bytes(b"x")
    assert models.resolve_path("sams", "tiny.pth", "", want="file") == (d / "tiny.pth").resolve()
    assert "tiny.pth" in comfy.list_models("sams")


def test_hub_ids_are_not_downloaded_without_consent(monkeypatch):
    monkeypatch.delenv("RESPEC_ALLOW_DOWNLOADS", raising=False)
    with pytest.raises((DownloadNotAllowedError, MissingWeightsError)) as e:
        models.resolve_hf("no-such-org/no-such-model", "LLM", None, "huggingface-cli download ...")
    assert "no-such-org/no-such-model" in str(e.value)


def test_truncated_checkpoints_raise_a_clear_error(tmp_path):
    import torch
    p = tmp_path / "w.pt"
    torch.save({"a": torch.ones(100)}, p)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptWeightsError, match="truncated"):
        models.load_torch_file(p)
    s = tmp_path / "w.safetensors"
    s.write_bytes(b"\x00" * 10)
    with pytest.raises(CorruptWeightsError, match="safetensors"):
        models.load_safetensors(s)


def test_checkpoints_with_code_are_refused(tmp_path):
    """weights_only=True: a pickle that would run code is not loaded."""
    import pickle
    p = tmp_path / "evil.pt"

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    p.write_bytes(pickle.dumps(Evil()))
    with pytest.raises(CorruptWeightsError):
        models.load_torch_file(p)


def test_standalone_progress_interrupts_at_the_next_update():
    comfy.clear_interrupt()
    with comfy.progress(3) as bar:
        bar.update()
        comfy.request_interrupt()
        with pytest.raises(Interrupted):
            bar.update()
    comfy.check_interrupted()  # the request is consumed once


def test_events_reach_listeners_and_a_failing_listener_does_not_break_sending():
    got = []
    remove_bad = comfy.add_listener(lambda n, d: 1 / 0)
    remove = comfy.add_listener(lambda n, d: got.append((n, d)))
    comfy.send_event("history", {"v": 1})
    remove(); remove_bad()
    comfy.send_event("history", {"v": 2})
    assert got == [("respec.history", {"v": 1})]


def test_standalone_mode_is_detected_without_comfyui():
    assert comfy.in_comfyui() is False
    assert comfy.routes() is None
    import torch
    assert comfy.manage(weights(2, 2), torch.device("cpu")).patcher is None
    assert str(comfy.user_dir()).endswith("respec_home")


def test_any_image_becomes_rgb_uint8_with_alpha_over_white():
    rgba = np.zeros((2, 2, 4), np.uint8)
    rgba[0, 0] = (10, 20, 30, 255)                      # opaque; the rest fully transparent
    out = rgb_array(rgba)
    assert out.shape == (2, 2, 3) and out.dtype == np.uint8
    assert out[0, 0].tolist() == [10, 20, 30] and out[1, 1].tolist() == [255, 255, 255]
    assert rgb_array(np.array([[True, False]])).tolist() == [[[255] * 3, [0] * 3]]
    assert rgb_array(np.array([[1.0, 0.0]], np.float32))[0, 0].tolist() == [255] * 3
    assert rgb_array(np.array([[200.0]]))[0, 0].tolist() == [200] * 3      # 0..255 floats kept
    assert rgb_array(StoredImage(np.full((1, 1, 1), 7, np.uint8)))[0, 0].tolist() == [7] * 3


def test_masks_threshold_at_half_and_resize_nearest():
    assert as_mask(np.array([[0.4, 0.6]])).tolist() == [[False, True]]
    assert as_mask(np.array([[127, 128]], np.uint8)).tolist() == [[False, True]]
    with pytest.raises(InputError, match="H×W mask"):
        as_mask(np.zeros((2, 2, 3)))
    big = resize_mask(np.array([[True, False]]), (2, 4))
    assert big.tolist() == [[True, True, False, False]] * 2


def test_records_are_strict_json():
    rec = json_safe({"a": float("nan"), "b": np.float32(0.5), "c": (np.int64(2), float("inf")), 3: np.array(1.5)})
    assert rec == {"a": None, "b": 0.5, "c": [2, None], "3": 1.5}
    assert type(rec["b"]) is float and type(rec["c"][0]) is int
