"""Model sources typed into a workflow (the VLM loader's hf_model, the Flux.2 loader's custom_model)
stay inside the registered model folders or are plain Hugging Face ids; the core loaders called
directly (CLI, Python) still take any local folder."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

import comfy_stand_in
from conftest import core
from controller_helpers import tiny_qwen_dir  # noqa: F401

ESCAPES = ["/etc", "../outside", "sub/../../outside", "link", "owner/..", "~/model", "C:\\models\\x"]


def _models_dir() -> Path:
    return Path(os.environ["RESPEC_MODELS_DIR"])


@pytest.fixture
def llm_dir(tmp_path):
    """models/LLM with a model folder `mine/` and a symlink `link` to a folder outside it."""
    folder = _models_dir() / "LLM"
    (folder / "mine").mkdir(parents=True)
    (folder / "mine" / "config.json").write_text("{}", encoding="utf-8")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config.json").write_text("{}", encoding="utf-8")
    (folder / "link").symlink_to(outside, target_is_directory=True)
    return folder


@pytest.fixture
def model_source(pack):
    return core(pack, "paths").model_source


@pytest.fixture
def input_error(pack):
    return core(pack, "errors").InputError


@pytest.mark.parametrize("value", ["mine", "mine/config.json", "{llm}/mine"])
def test_a_model_inside_the_registered_folder_is_accepted_as_its_resolved_path(model_source, llm_dir, value):
    got = model_source(value.format(llm=llm_dir), "LLM", "hf_model")
    assert Path(got) == (llm_dir / value.replace("{llm}/", "")).resolve()


@pytest.mark.parametrize("value", ["Qwen/Qwen3-VL-4B-Instruct", "black-forest-labs/FLUX.2-klein-base-4B", "a_b/c.d-e"])
def test_a_hugging_face_id_passes_unchanged(model_source, llm_dir, value):
    assert model_source(value, "LLM", "hf_model") == value


@pytest.mark.parametrize("value", ESCAPES + ["{outside}"])
def test_paths_leaving_the_model_folders_are_refused_naming_the_allowed_folders(model_source, input_error, llm_dir,
                                                                                tmp_path, value):
    value = value.format(outside=tmp_path / "outside")
    with pytest.raises(input_error) as err:
        model_source(value, "LLM", "the VLM loader's hf_model")
    text = str(err.value)
    assert "the VLM loader's hf_model" in text and str(llm_dir.resolve()) in text
    assert "outside" in text or "neither" in text


@pytest.mark.parametrize("value", ["a/b/c", "owner/", "/", "owner//name", "-x/y", "owner/na me", "ow\x00ner/x", "  "])
def test_names_that_are_no_model_there_and_no_hugging_face_id_are_refused(model_source, input_error, llm_dir, value):
    with pytest.raises(input_error):
        model_source(value, "LLM", "hf_model")


def test_inside_comfyui_the_registered_folders_and_extra_paths_are_the_allowed_ones(pack, monkeypatch, tmp_path,
                                                                                    model_source, input_error):
    fp, _ = comfy_stand_in.install(monkeypatch, tmp_path / "comfy_models")
    extra = tmp_path / "extra_diffusers"
    (extra / "pipe").mkdir(parents=True)
    core(pack, "comfy").register_model_folders()
    fp.add_model_folder_path("diffusers", str(extra))   # as extra_model_paths.yaml would
    assert Path(model_source("pipe", "diffusers", "custom_model")) == (extra / "pipe").resolve()
    assert Path(model_source(str(extra / "pipe"), "diffusers", "custom_model")) == (extra / "pipe").resolve()
    # the standalone models dir is not a ComfyUI folder
    (_models_dir() / "diffusers" / "pipe2").mkdir(parents=True)
    with pytest.raises(input_error, match="extra_diffusers"):
        model_source(str(_models_dir() / "diffusers" / "pipe2"), "diffusers", "custom_model")


# ----------------------------------------------------------------------------- at the nodes

def _vlm_load(pack, model, hf_model):
    return pack.NODE_CLASS_MAPPINGS["ReSpecVLMLoader"].execute("qwen3-vl", model, "auto", "cpu", True, False,
                                                               65536, 16, "off", hf_model=hf_model).result[0]


def test_vlm_loader_loads_hf_model_from_the_llm_folder_and_refuses_it_outside(pack, tiny_qwen_dir, input_error):
    inside = _models_dir() / "LLM" / "tiny"
    shutil.copytree(tiny_qwen_dir, inside)
    assert _vlm_load(pack, "unused", "tiny") is not None
    with pytest.raises(input_error, match="outside the model folders for LLM"):
        _vlm_load(pack, "unused", str(tiny_qwen_dir))
    # the core loader, called directly as the CLI does, still takes any folder
    from_core = core(pack, "controller.backends").load_backend("qwen3-vl", str(tiny_qwen_dir), device="cpu",
                                                               max_pixels=65536, max_new_tokens=16,
                                                               json_constrained=False)
    assert from_core is not None


def test_vlm_loader_looks_a_hugging_face_id_up_without_downloading(pack, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf_cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(core(pack, "errors").DownloadNotAllowedError, match="downloads are off"):
        _vlm_load(pack, "unused", "nobody/not-a-model")


@pytest.mark.parametrize("value", ESCAPES)
def test_vlm_loader_refuses_escapes(pack, llm_dir, input_error, value):
    with pytest.raises(input_error):
        _vlm_load(pack, "unused", value)


@pytest.mark.parametrize("value", ESCAPES + ["{outside}"])
def test_flux2_loader_refuses_custom_model_outside_the_diffusers_folders(pack, input_error, tmp_path, value):
    (tmp_path / "outside").mkdir()
    (_models_dir() / "diffusers").mkdir(parents=True)
    (_models_dir() / "diffusers" / "link").symlink_to(tmp_path / "outside", target_is_directory=True)
    with pytest.raises(input_error) as err:
        pack.NODE_CLASS_MAPPINGS["ReSpecFlux2Loader"].execute(
            "unused", "(none)", "(none)", "(none)", "fp32", "none", False, custom_model=value.format(outside=tmp_path))
    assert "custom_model" in str(err.value) and str((_models_dir() / "diffusers").resolve()) in str(err.value)


@pytest.mark.parametrize("value, expected", [("pipe", "{dir}/pipe"), ("{dir}/pipe", "{dir}/pipe"),
                                             ("owner/name", "owner/name"), ("", "the-model")])
def test_flux2_loader_hands_accepted_sources_to_the_core_loader(pack, monkeypatch, value, expected):
    folder = (_models_dir() / "diffusers")
    (folder / "pipe").mkdir(parents=True)
    seen = []
    adapter = sys.modules[f"{pack.__name__}.nodes.editor_nodes"]
    monkeypatch.setattr(adapter, "load_flux2", lambda source, **kw: seen.append(source) or "editor")
    out = pack.NODE_CLASS_MAPPINGS["ReSpecFlux2Loader"].execute(
        "the-model", "(none)", "(none)", "(none)", "fp32", "none", False, custom_model=value.format(dir=folder))
    assert out.result == ("editor",) and seen == [expected.format(dir=folder.resolve())]
