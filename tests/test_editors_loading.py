"""Loading FLUX.2 [klein]: ComfyUI single files, diffusers folders, the one model cache, and the
errors for missing, truncated and mismatched weights (tiny random klein, CPU, offline)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import core

REFS = [np.random.RandomState(i).randint(0, 256, (64, 80, 3), dtype=np.uint8) for i in range(2)]


def _run(editor, seed=5):
    return np.asarray(editor.edit(REFS, "remove the vase", output_size=(80, 64), seed=seed, steps=2))


# A reloaded model runs the same weights through differently laid-out tensors, and float
# rounding of that order differs between CPUs: 1 of 15,360 uint8 values was seen 1 level off.
# The weights must match exactly; the images may differ by this much and no more.
IMAGE_TOLERANCE = 2  # uint8 levels, largest per-value difference


def _assert_same_weights(got, want):
    """Every component's parameters and buffers are bit-identical (names, shapes, values)."""
    for name in ("transformer", "vae", "text_encoder"):
        a, b = getattr(got, name).state_dict(), getattr(want, name).state_dict()
        assert a.keys() == b.keys(), name
        for key in a:
            assert torch.equal(a[key], b[key]), f"{name}.{key}"


def _assert_same_image(got, want):
    assert got.shape == want.shape
    diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
    assert diff.max() <= IMAGE_TOLERANCE, f"largest difference {diff.max()} > {IMAGE_TOLERANCE}"
    assert (diff > 0).mean() < 0.01, f"{(diff > 0).mean():.2%} of values differ"


def _models_dir() -> Path:
    return Path(os.environ["RESPEC_MODELS_DIR"])


@pytest.fixture
def single_files(pack):
    """The tiny klein written in ComfyUI's single-file layout into this test's models dir."""
    return core(pack, "tiny.klein").write_tiny_klein_single_files(_models_dir())


@pytest.fixture
def loader(pack):
    return pack.NODE_CLASS_MAPPINGS["ReSpecFlux2Loader"]


def _load(loader, files, **over):
    args = dict(model=files["config"], transformer_file=files["transformer"], text_encoder_file=files["text_encoder"],
                vae_file=files["vae"], dtype="fp32", offload="none", allow_download=False)
    args.update(over)
    return loader.execute(**args).result[0]


@pytest.mark.slow
def test_single_files_load_through_the_loader_and_match_the_in_memory_pipeline(pack, loader, single_files):
    editor = _load(loader, single_files)
    reference = core(pack, "editors").Flux2Editor(single_files["pipe"])
    _assert_same_weights(editor.pipe, reference.pipe)
    _assert_same_image(_run(editor), _run(reference))
    assert editor.text_encoder_out_layers == (1, 2, 3) and not editor.is_distilled


def test_single_file_names_are_listed_for_the_loader(pack, single_files):
    inputs = pack.NODE_CLASS_MAPPINGS["ReSpecFlux2Loader"].INPUT_TYPES()["required"]
    choices = {name: spec[1]["options"] for name, spec in inputs.items() if spec[0] == "COMBO"}  # V3 drop-downs
    assert single_files["transformer"] in choices["transformer_file"]
    assert single_files["text_encoder"] in choices["text_encoder_file"]
    assert single_files["vae"] in choices["vae_file"]
    assert single_files["config"] in choices["model"]


@pytest.mark.slow
def test_diffusers_folder_loads_and_matches_the_in_memory_pipeline(pack, loader):
    tiny = core(pack, "tiny.klein")
    pipe = tiny.build_tiny_klein_pipeline(seed=1)
    tiny.save_tiny_klein_diffusers(_models_dir() / "diffusers" / "tiny-klein", pipe)
    editor = loader.execute(model="tiny-klein", transformer_file="(none)", text_encoder_file="(none)",
                            vae_file="(none)", dtype="fp32", offload="none", allow_download=False).result[0]
    _assert_same_weights(editor.pipe, pipe)
    _assert_same_image(_run(editor), _run(core(pack, "editors").Flux2Editor(pipe)))


@pytest.mark.slow
def test_model_cache_returns_the_same_editor_for_the_same_settings_and_a_new_one_when_they_change(
        pack, loader, single_files):
    cache = core(pack, "models").CACHE
    loads = cache.loads
    first = _load(loader, single_files)
    again = _load(loader, single_files)
    assert again is first and cache.loads == loads + 1
    other = _load(loader, single_files, dtype="bf16")
    assert other is not first and cache.loads == loads + 2
    assert other.pipe.transformer.dtype == torch.bfloat16
    cache.drop_kind("flux2")


def test_missing_file_names_the_file_the_folders_searched_and_where_to_get_it(pack, loader, single_files):
    errors = core(pack, "errors")
    with pytest.raises(errors.MissingWeightsError) as info:
        _load(loader, single_files, vae_file="flux2-vae.safetensors")
    message = str(info.value)
    assert "flux2-vae.safetensors" in message
    assert str(_models_dir() / "vae") in message
    assert "models/vae" in message  # how to get it


def test_truncated_file_names_the_component_and_the_file(pack, loader, single_files):
    errors = core(pack, "errors")
    path = _models_dir() / "text_encoders" / single_files["text_encoder"]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(errors.CorruptWeightsError) as info:
        _load(loader, single_files)
    assert "text_encoder" in str(info.value) and str(path) in str(info.value)


def test_mismatched_checkpoint_lists_missing_and_unexpected_keys(pack, loader, single_files):
    from safetensors.torch import load_file, save_file
    errors = core(pack, "errors")
    path = _models_dir() / "diffusion_models" / single_files["transformer"]
    sd = load_file(str(path))
    del sd["model.diffusion_model.txt_in.weight"]
    sd["model.diffusion_model.extra_block.weight"] = torch.zeros(2)
    save_file(sd, str(path))
    with pytest.raises(errors.CorruptWeightsError) as info:
        _load(loader, single_files)
    message = str(info.value)
    assert "transformer" in message
    assert "context_embedder.weight" in message  # txt_in, in diffusers' name
    assert "extra_block.weight" in message


def test_configs_missing_beside_single_files_are_named(pack, loader, single_files):
    import shutil
    errors = core(pack, "errors")
    shutil.rmtree(_models_dir() / "diffusers" / single_files["config"] / "tokenizer")
    with pytest.raises(errors.MissingWeightsError, match="tokenizer/"):
        _load(loader, single_files)


def test_hugging_face_id_not_cached_locally_needs_download_consent(pack, loader, monkeypatch, tmp_path):
    errors = core(pack, "errors")
    import huggingface_hub.constants
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))  # an empty cache
    with pytest.raises(errors.DownloadNotAllowedError, match="allow"):
        loader.execute(model="black-forest-labs/FLUX.2-klein-base-4B", transformer_file="(none)",
                       text_encoder_file="(none)", vae_file="(none)", dtype="fp32", offload="none",
                       allow_download=False)


@pytest.mark.parametrize("damage", ["truncated", "empty", "not_an_object"])
@pytest.mark.parametrize("name", ["model_index.json", "transformer/config.json", "vae/config.json"])
def test_a_damaged_config_json_is_named_with_what_to_do(pack, loader, single_files, name, damage):
    errors = core(pack, "errors")
    path = _models_dir() / "diffusers" / single_files["config"] / name
    text = path.read_text()
    path.write_text({"truncated": text[: len(text) // 2], "empty": "", "not_an_object": "[1, 2]"}[damage])
    with pytest.raises(errors.CorruptWeightsError) as info:
        _load(loader, single_files)
    assert str(path) in str(info.value) and "download" in str(info.value)
