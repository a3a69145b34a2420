"""The transformers backends with tiny random Qwen3-VL and InternVL3 folders: the real
processor -> generate -> decode path, constrained decoding, caching, interruption, errors."""
from __future__ import annotations

import json

import pytest
from PIL import Image

from controller_helpers import CountingVLM, make_history, picture, tiny_internvl_dir, tiny_qwen_dir  # noqa: F401
from respec import comfy, models
from respec.controller import PlanOptions, load_backend, plan_turn, unload_backend
from respec.controller.backends.transformers_vlm import xgrammar_available
from respec.controller.schemas import bound_strings, midturn_schema, restoration_schema
from respec.errors import CorruptWeightsError, DownloadNotAllowedError, InputError, Interrupted, MissingWeightsError

KINDS = [("qwen3-vl", "tiny_qwen_dir"), ("internvl3", "tiny_internvl_dir")]


def backend(request, kind, fixture, **options):
    folder = request.getfixturevalue(fixture)
    return load_backend(kind, str(folder), **{"json_constrained": False, **options})


def parts_with(n_images: int) -> list:
    parts = []
    for k in range(n_images):
        parts += [f"Image {k}:", Image.fromarray(picture(k, (40 + 8 * k, 56)))]
    return parts + ["Describe the change."]


@pytest.mark.slow
@pytest.mark.parametrize("kind,fixture", KINDS)
@pytest.mark.parametrize("n_images", [1, 2, 3, 4, 5])
def test_generate_path_runs_with_1_to_5_images(request, kind, fixture, n_images):
    vlm = backend(request, kind, fixture)
    out = vlm.chat(parts_with(n_images), system="You are a test.", max_new_tokens=6)
    assert isinstance(out, str)
    assert vlm.name == f"{kind}:{request.getfixturevalue(fixture)}"


@pytest.mark.slow
@pytest.mark.parametrize("kind,fixture", KINDS)
@pytest.mark.parametrize("n_images", [2, 3, 4, 5])
def test_plan_turn_runs_end_to_end_with_2_to_5_history_images(request, kind, fixture, n_images):
    vlm = CountingVLM(backend(request, kind, fixture))
    plan = plan_turn(make_history(n_images), "remove the large cardboard box", vlm, True, PlanOptions(max_new_tokens=6))
    assert len(vlm.calls) == 1 and plan.vlm_called and plan.turn == n_images
    assert plan.raw_text == plan.raw_text.strip()
    assert plan.meta["images_shown"] == list(range(n_images))


@pytest.mark.slow
def test_greedy_decoding_is_deterministic(request):
    vlm = backend(request, "qwen3-vl", "tiny_qwen_dir")
    parts = parts_with(2)
    assert vlm.chat(parts, max_new_tokens=12) == vlm.chat(parts, max_new_tokens=12)


@pytest.mark.slow
@pytest.mark.skipif(not xgrammar_available(), reason="xgrammar is not installed")
@pytest.mark.parametrize("kind,fixture", KINDS)
def test_json_constrained_decoding_gives_parseable_json(request, kind, fixture):
    # Strings are bounded so the random tiny model's answer closes within the token cap.
    # (the restoration schema is exercised through plan_turn in the next test)
    vlm = backend(request, kind, fixture, json_constrained=True, json_max_string=4)
    text = vlm.chat(parts_with(3), system="Answer in JSON.", max_new_tokens=300, json_schema=midturn_schema())
    obj = json.loads(text, strict=False)
    assert set(obj) == {"reasoning", "synthesis_instruction"}
    assert obj["reasoning"]["action_type"] in ("Add", "Modify", "Replace", "Style-transfer", "Other")


@pytest.mark.slow
@pytest.mark.skipif(not xgrammar_available(), reason="xgrammar is not installed")
def test_constrained_plan_parses_without_the_parse_failure_fallback(request):
    vlm = backend(request, "qwen3-vl", "tiny_qwen_dir", json_constrained=True, json_max_string=3)
    plan = plan_turn(make_history(3), "remove the large cardboard box", vlm, True, PlanOptions(max_new_tokens=500))
    answer = json.loads(plan.raw_text, strict=False)  # the whole answer is one JSON object
    assert plan.meta["parse"] == "first_json_object"
    assert plan.identity_anchor_id == answer["identity_anchor_id"] in (0, 1, 2)
    assert plan.restoration_source_id == answer["restoration_source_id"] in (0, 1, 2)
    assert list(plan.image_ids) == answer["image_ids"]
    assert plan.reasoning == answer["reasoning"]
    assert not {"json_parse_failed", "identity_anchor_id_missing", "restoration_source_id_missing",
                "image_ids_missing"} & set(plan.fallbacks)


def test_bound_strings_limits_every_string():
    s = bound_strings(restoration_schema(4), 9)
    assert s["properties"]["synthesis_instruction"]["maxLength"] == 9
    assert s["properties"]["reasoning"]["properties"]["notes"]["maxLength"] == 9
    assert "maxLength" not in restoration_schema(4)["properties"]["synthesis_instruction"]


@pytest.mark.slow
def test_unconstrained_backend_ignores_the_schema(request):
    vlm = backend(request, "qwen3-vl", "tiny_qwen_dir")
    assert vlm.json_constrained is False
    a = vlm.chat(parts_with(1), max_new_tokens=8, json_schema=midturn_schema())
    b = vlm.chat(parts_with(1), max_new_tokens=8)
    assert a == b


@pytest.mark.slow
def test_weights_load_once_per_settings(tiny_qwen_dir):
    before = models.CACHE.loads
    a = load_backend("qwen3-vl", str(tiny_qwen_dir), json_constrained=False, max_pixels=1234)
    b = load_backend("qwen3-vl", str(tiny_qwen_dir), json_constrained=False, max_pixels=1234)
    assert a is b and models.CACHE.loads == before + 1
    c = load_backend("qwen3-vl", str(tiny_qwen_dir), json_constrained=False, max_pixels=4321)
    assert c is not a and models.CACHE.loads == before + 2
    assert unload_backend(c) is True and c.model is None
    with pytest.raises(InputError, match="unloaded"):
        c.chat(["hi"])


@pytest.mark.slow
def test_model_folder_is_found_in_the_llm_models_folder(tmp_path, monkeypatch):
    from respec.tiny.vlm import build_tiny_qwen3vl
    models_dir = tmp_path / "models"
    monkeypatch.setenv("RESPEC_MODELS_DIR", str(models_dir))
    build_tiny_qwen3vl(models_dir / "LLM" / "my-tiny-qwen")
    vlm = load_backend("qwen3-vl", "my-tiny-qwen", json_constrained=False)
    assert vlm.folder == str((models_dir / "LLM" / "my-tiny-qwen").resolve())
    assert isinstance(vlm.chat(parts_with(1), max_new_tokens=3), str)


def test_missing_folder_names_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("RESPEC_MODELS_DIR", str(tmp_path / "m"))
    with pytest.raises(MissingWeightsError) as e:
        load_backend("qwen3-vl", "no-such-model")
    assert str(tmp_path / "m" / "LLM") in str(e.value)


def test_hub_id_without_consent_is_not_downloaded(monkeypatch):
    monkeypatch.delenv("RESPEC_ALLOW_DOWNLOADS", raising=False)
    with pytest.raises(DownloadNotAllowedError, match="allow_download"):
        load_backend("qwen3-vl", "Qwen/Qwen3-VL-8B-Instruct", allow_download=False)


def test_remote_code_checkpoint_is_refused(tmp_path):
    folder = tmp_path / "InternVL3-8B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "internvl_chat",
                                                    "auto_map": {"AutoModel": "modeling_internvl_chat.X"}}))
    with pytest.raises(InputError, match="remote code"):
        load_backend("internvl3", str(folder))


@pytest.mark.slow
def test_truncated_weights_are_reported_as_corrupt(tiny_internvl_dir, tmp_path):
    import shutil
    folder = tmp_path / "broken"
    shutil.copytree(tiny_internvl_dir, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    with pytest.raises(CorruptWeightsError, match="could not load the internvl3 controller"):
        load_backend("internvl3", str(folder))


@pytest.mark.slow
def test_folder_of_the_other_kind_is_refused(tiny_qwen_dir):
    with pytest.raises(InputError, match="not a internvl3 model"):
        load_backend("internvl3", str(tiny_qwen_dir))


def test_unknown_kind_is_refused():
    with pytest.raises(InputError, match="unknown controller backend"):
        load_backend("llava", "x")


@pytest.mark.slow
def test_interrupt_stops_generation_within_a_token(request, monkeypatch):
    vlm = backend(request, "qwen3-vl", "tiny_qwen_dir")
    seen = []
    original = comfy.Progress.update

    def update(self, n=1):
        seen.append(n)
        if len(seen) == 3:
            comfy.request_interrupt()  # the user presses cancel while token 3 is generated
        original(self, n)

    monkeypatch.setattr(comfy.Progress, "update", update)
    with pytest.raises(Interrupted):
        vlm.chat(parts_with(2), max_new_tokens=50)
    assert len(seen) == 3
    comfy.clear_interrupt()


@pytest.mark.slow
def test_progress_advances_once_per_generated_token(request, monkeypatch):
    vlm = backend(request, "internvl3", "tiny_internvl_dir")
    totals, steps = [], []
    original_init, original_update = comfy.Progress.__init__, comfy.Progress.update

    def init(self, total, desc=""):
        totals.append(total)
        original_init(self, total, desc)

    def update(self, n=1):
        steps.append(n)
        original_update(self, n)

    monkeypatch.setattr(comfy.Progress, "__init__", init)
    monkeypatch.setattr(comfy.Progress, "update", update)
    vlm.chat(parts_with(1), max_new_tokens=7)
    assert totals == [7] and 1 <= len(steps) <= 7


def test_quantised_loading_without_bitsandbytes_says_how_to_install_it(tiny_qwen_dir, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)   # as if not installed
    with pytest.raises(InputError) as e:
        load_backend("qwen3-vl", str(tiny_qwen_dir), device="cpu", quantization="4-bit")
    assert "pip install bitsandbytes" in str(e.value) and "quantization to none" in str(e.value)


def test_quantised_loading_needs_a_cuda_gpu(tiny_qwen_dir, monkeypatch):
    import sys
    import types
    monkeypatch.setitem(sys.modules, "bitsandbytes", types.ModuleType("bitsandbytes"))
    with pytest.raises(InputError) as e:
        load_backend("qwen3-vl", str(tiny_qwen_dir), device="cpu", quantization="8-bit")
    assert "CUDA" in str(e.value)
    with pytest.raises(InputError, match="unknown quantization"):
        load_backend("qwen3-vl", str(tiny_qwen_dir), device="cpu", quantization="3-bit")


@pytest.mark.parametrize("template", ["", "   \n", "{% for m in messages %}{{ m['content'] }}", "{{ messages[0]['content' }}"])
def test_a_damaged_or_empty_chat_template_is_named_at_load(tiny_qwen_dir, tmp_path, template):
    import shutil
    folder = tmp_path / "damaged-template"
    shutil.copytree(tiny_qwen_dir, folder)
    (folder / "chat_template.jinja").write_text(template)
    with pytest.raises(CorruptWeightsError) as info:
        load_backend("qwen3-vl", str(folder))     # at load, not at the first chat
    assert str(folder / "chat_template.jinja") in str(info.value)
