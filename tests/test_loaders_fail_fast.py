"""The pack's loaders say what is installed and fail fast (issue 45): their drop-downs list what is on
this machine first, their tooltips name what is and is not installed, and a prompt whose model is not
here (downloads off) fails at ComfyUI's validation, before any model loads, with the words the run
itself would fail with (VALIDATE_INPUTS; tiny random klein, offline, an empty Hugging Face cache)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import core

KLEIN_9B = "black-forest-labs/FLUX.2-klein-base-9B"


@pytest.fixture(autouse=True)
def _empty_hf_cache(monkeypatch, tmp_path):
    import huggingface_hub.constants
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))


def _models_dir() -> Path:
    return Path(os.environ["RESPEC_MODELS_DIR"])


def _spec(pack, node: str, name: str):
    """A drop-down's (choices, options), from a V1 `[choices, options]` or a V3 `("COMBO", {"options": ...})`."""
    section = pack.NODE_CLASS_MAPPINGS[node].INPUT_TYPES()
    kind, options = {**section["required"], **section.get("optional", {})}[name]
    if kind == "COMBO":
        options = dict(options)
        return options.pop("options"), options
    return kind, options


def test_nothing_installed_the_list_says_so_and_a_run_fails_at_validation_in_the_runs_words(pack):
    loader = pack.NODE_CLASS_MAPPINGS["ReSpecFlux2Loader"]
    choices, options = _spec(pack, "ReSpecFlux2Loader", "model")
    assert KLEIN_9B in choices and "Nothing installed here yet" in options["tooltip"]
    assert options["respec_installed"] == []
    assert KLEIN_9B in options["tooltip"].split("Not installed:")[1]
    said = loader.validate_inputs(model=KLEIN_9B, transformer_file="(none)", text_encoder_file="(none)",
                                  vae_file="(none)", allow_download=False)
    errors = core(pack, "errors")
    with pytest.raises(errors.DownloadNotAllowedError) as run:
        loader.execute(model=KLEIN_9B, transformer_file="(none)", text_encoder_file="(none)", vae_file="(none)",
                       dtype="fp32", offload="none", allow_download=False)
    assert said == str(run.value), "validation fails with the words of the run"
    assert "Looked in" in said and "How to get it" in said and "allow_download" in said


def test_with_downloads_allowed_validation_lets_the_loader_fetch(pack):
    loader = pack.NODE_CLASS_MAPPINGS["ReSpecFlux2Loader"]
    assert loader.validate_inputs(model=KLEIN_9B, transformer_file="(none)", text_encoder_file="(none)",
                                  vae_file="(none)", allow_download=True) is True


def test_an_installed_pipeline_comes_first_marked_installed_and_validates(pack):
    files = core(pack, "tiny.klein").write_tiny_klein_single_files(_models_dir())
    choices, options = _spec(pack, "ReSpecFlux2Loader", "model")
    assert choices[0] == files["config"], choices
    assert f"Installed here: {files['config']}." in options["tooltip"]
    assert options["respec_installed"] == [files["config"]]   # what the panel marks "installed" in the list
    loader = pack.NODE_CLASS_MAPPINGS["ReSpecFlux2Loader"]
    assert loader.validate_inputs(model=files["config"], transformer_file=files["transformer"],
                                  text_encoder_file=files["text_encoder"], vae_file=files["vae"],
                                  allow_download=False) is True


def test_validation_still_refuses_values_outside_the_lists(pack):
    """Declaring an input in VALIDATE_INPUTS turns ComfyUI's own drop-down check off for it: the
    loader checks the lists itself (an API prompt cannot name an arbitrary path)."""
    flux = pack.NODE_CLASS_MAPPINGS["ReSpecFlux2Loader"]
    said = flux.validate_inputs(model="/etc", transformer_file="(none)", text_encoder_file="(none)",
                                vae_file="(none)", allow_download=True)
    assert isinstance(said, str) and "is not one of its choices" in said
    said = flux.validate_inputs(model=KLEIN_9B, transformer_file="../../x.safetensors", text_encoder_file="(none)",
                                vae_file="(none)", allow_download=True)
    assert isinstance(said, str) and "transformer_file" in said
    vlm = pack.NODE_CLASS_MAPPINGS["ReSpecVLMLoader"]
    assert "backend" in vlm.validate_inputs(backend="evil", model="Qwen/Qwen3-VL-8B-Instruct", allow_download=True)
    said = vlm.validate_inputs(backend="qwen3-vl", model="Qwen/Qwen3-VL-8B-Instruct", allow_download=True,
                               hf_model="/etc/passwd")
    assert isinstance(said, str) and said is not True


def test_a_linked_model_is_left_to_the_run(pack):
    """A linked input has no value at validation (ComfyUI leaves it out): nothing to check yet."""
    assert pack.NODE_CLASS_MAPPINGS["ReSpecVLMLoader"].validate_inputs(backend="qwen3-vl") is True
    assert pack.NODE_CLASS_MAPPINGS["ReSpecOmniGen2Loader"].validate_inputs() is True


def test_the_vlm_and_omnigen2_loaders_fail_fast_too(pack):
    vlm = pack.NODE_CLASS_MAPPINGS["ReSpecVLMLoader"]
    said = vlm.validate_inputs(backend="qwen3-vl", model="Qwen/Qwen3-VL-8B-Instruct", allow_download=False)
    assert isinstance(said, str) and "Qwen/Qwen3-VL-8B-Instruct" in said and "How to get it" in said
    choices, options = _spec(pack, "ReSpecVLMLoader", "model")
    assert "Not installed: Qwen/Qwen3-VL-8B-Instruct" in options["tooltip"]
    omni = pack.NODE_CLASS_MAPPINGS["ReSpecOmniGen2Loader"]
    said = omni.validate_inputs(model="OmniGen2/OmniGen2", allow_download=False)
    assert isinstance(said, str) and "OmniGen2" in said and "How to get it" in said
    assert omni.validate_inputs(model="OmniGen2/OmniGen2", allow_download=True) is True


def test_a_linked_allow_download_is_left_to_the_run(pack):
    """ComfyUI leaves a linked widget out of what VALIDATE_INPUTS gets: its value is not known yet."""
    flux = pack.NODE_CLASS_MAPPINGS["ReSpecFlux2Loader"]
    assert flux.validate_inputs(model=KLEIN_9B, transformer_file="(none)", text_encoder_file="(none)",
                                vae_file="(none)") is True
    assert isinstance(flux.validate_inputs(model=KLEIN_9B, transformer_file="(none)", text_encoder_file="(none)",
                                           vae_file="(none)", allow_download=False), str)
